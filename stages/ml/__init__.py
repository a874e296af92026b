"""The shared ML pieces the stages are built from: the model helpers, the training loop, losses,
data formats, generation, the RL actors, tracking. A piece never imports a stage."""
