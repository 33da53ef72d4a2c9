"""FedMoCo written against plugin API 2.2, frozen (a compatibility fixture)."""
