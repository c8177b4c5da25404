"""`albert glue`: one model fine-tuned on the five GLUE tasks, seeds x rates, and the GLUE-5 table."""
