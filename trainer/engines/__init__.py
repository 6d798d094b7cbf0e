"""Training engines besides the native LambdaMART learner (`trainer.lambdamart`)."""
