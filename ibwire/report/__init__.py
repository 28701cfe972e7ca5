"""Results made readable: tables (text, JSON, CSV), the packets `ibwire decode` prints (packets/), Parquet files,
the audit's and the fabric's reports, self-contained HTML pages (pictures/).  Nothing here computes a result."""
