"""Storage and data conversion: the warehouse filesystem, Arrow schemas, Parquet I/O."""
