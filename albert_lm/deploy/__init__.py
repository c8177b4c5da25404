"""The end of the road: using a model. `albert predict` (a fine-tuned model on new text), `albert
fill-mask` and `albert embed` (any ALBERT folder), `albert_lm.Predictor` (the three in memory) and
`albert export` (an ONNX graph for ONNX Runtime)."""
