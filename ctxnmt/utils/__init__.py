"""Small helpers shared by the data, training and decoding code."""
