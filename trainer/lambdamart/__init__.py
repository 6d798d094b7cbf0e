"""Native LambdaMART: lambda gradients (Burges 2010), histogram trees grown leaf-wise, boosting."""

from trainer.lambdamart.booster import IterationLog, TrainResult, train
from trainer.lambdamart.lambdas import lambdas_and_hessians
from trainer.lambdamart.params import LambdaMARTParams

__all__ = ["IterationLog", "LambdaMARTParams", "TrainResult", "lambdas_and_hessians", "train"]
