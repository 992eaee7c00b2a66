"""The residual LSTM language model: config, data stream, model, training, scoring."""
