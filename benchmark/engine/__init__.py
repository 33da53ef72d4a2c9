"""The engine: the stages of a cell (stages) and their composition (runner); the round loop
(rounds), the client state store (client_store) and round checkpoints (checkpoints); the saved
pre-training (pretrained) and the experiment tracker (tracking)."""
