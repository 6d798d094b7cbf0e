"""Why a model scored a document as it did: exact TreeSHAP for tree ensembles (treeshap),
occlusion against a baseline for networks (occlusion), the top features of a result (top)."""
