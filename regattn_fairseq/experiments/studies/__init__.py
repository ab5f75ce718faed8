"""Studies beside the tables: the γ = 1 attention-gradient study."""
