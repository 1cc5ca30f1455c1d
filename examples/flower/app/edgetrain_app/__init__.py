"""edgetrain on Flower: the ServerApp and ClientApp of ``flwr run examples/flower/app``."""
