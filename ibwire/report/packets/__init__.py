"""Output of `ibwire decode`: summary lines, JSON, field columns, hex dumps and header trees."""
