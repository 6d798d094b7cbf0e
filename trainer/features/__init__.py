"""Feature sources for training and serving: query-level columns, item feature tables joined by
document id, the item feature snapshot a model version carries, and item sets in Redis."""
