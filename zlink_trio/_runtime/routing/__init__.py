"""Calls and routing: local resolution and admission (``local``), remote owners, the routing cache
and the wire (``remote``, its answers in ``owners``), the choice between them (``messaging``),
work from peers (``inbound``) and the hand-over of a lost cold race (``forward``)."""
