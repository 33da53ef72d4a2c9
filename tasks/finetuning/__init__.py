"""Fine-tuning: the encoder is trained together with a classifier on labelled data (full
fine-tuning, semi-supervised fine-tuning on a labelled fraction), or the method's own classifier is
scored end to end."""
