"""Building blocks two or more method files use: FedAvg over uploads, NT-Xent and its variants,
EMA and momentum targets, working nets, optimizers, the SimCLR and federated-BYOL families. Maths
one method alone uses lives in that method's file."""
