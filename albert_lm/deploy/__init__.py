"""The end of the road: running a fine-tuned model on new text (`albert predict`)."""
