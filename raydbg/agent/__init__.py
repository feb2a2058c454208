"""Node agents: one Ray actor per node (relay, collector, monitor); the head's serves the gateway."""
