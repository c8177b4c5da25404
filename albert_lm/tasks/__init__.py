"""Downstream tasks: readers, features, predictions and metrics for GLUE, SQuAD, RACE and users' own data."""
