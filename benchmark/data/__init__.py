"""Data layer: datasets (uint8 images in memory), partitioners, public splits, augmentations."""
