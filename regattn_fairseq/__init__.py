"""regattn: sparse and structured attention mappings and fairseq plugin."""
