"""Models trained by LightGBM or XGBoost → the tree dump (`app.artifacts.tree_dump`)."""

from trainer.convert.lightgbm_model import ModelFormatError, convert_lightgbm
from trainer.convert.xgboost_model import convert_xgboost

__all__ = ["ModelFormatError", "convert_lightgbm", "convert_xgboost"]
