"""The agent host: the node agent actor with its list of features, and starting/stopping agents (composition)."""
