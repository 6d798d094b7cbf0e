"""Training engines, each writing a verified version directory and returning a
`training_result.TrainingResult`: `tree_model` (native LambdaMART or LightGBM lambdarank on
in-memory data), `dask_model` (LightGBM on a Dask cluster, the workers reading the data) and
`dnn_model` (LambdaDNN / LambdaDCN)."""
