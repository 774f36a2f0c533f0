"""The local node: one host run's identity, admission seal and shared engines (``node``), and the
envelope every admitted message travels in (``envelope``). Names no Spot or Actor."""
