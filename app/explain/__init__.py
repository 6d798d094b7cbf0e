"""Why a model scored a document as it did: exact TreeSHAP for tree ensembles (treeshap),
occlusion against a baseline for networks (occlusion), the features an explanation shows
(top), and what /rerank adds to its results (ranked)."""
