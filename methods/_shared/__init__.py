"""Pure building blocks shared by the methods: aggregation, EMA, losses, heads, clustering, local
training."""
