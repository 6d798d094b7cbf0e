"""`ltr simulate`: a personalised ranking dataset with known ground truth (relevance, user
types, examination probabilities)."""

from trainer.simulate.config import SimulationConfig
from trainer.simulate.generator import SimulationSummary, simulate

__all__ = ["SimulationConfig", "SimulationSummary", "simulate"]
