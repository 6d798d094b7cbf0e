"""A worked example of LambdaRank gradients (one query of ten documents, all scores 0, NDCG
gain 2^l - 1 with the log2 discount), as RankLib computes them (Burges 2010): the native
LambdaMART lambdas and the LambdaRank loss's gradient are both checked against it."""

LABELS = [0, 0, 0, 1, 1, 0, 1, 1, 0, 0]
# fmt: off
LAMBDAS = [-0.495, -0.206, -0.104, 0.231, 0.231, -0.033, 0.240, 0.247, -0.051, -0.061]
# fmt: on
