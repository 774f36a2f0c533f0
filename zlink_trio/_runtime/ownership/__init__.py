"""Ownership in the Location Store: Spot and Actor authority records and object generations
(``authority``), released and marked Ready in batches (``batches``), and node membership
(``membership``), made of the node record and peer events (``node_record``), this run's own
record under a lease (``lease``) and the watch of its peers (``peer_watch``)."""
