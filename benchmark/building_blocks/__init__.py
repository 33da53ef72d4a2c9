"""Building blocks methods use (through benchmark.api): backbones, heads and losses, tensor
helpers, aggregation, the local training loop, device placement."""
