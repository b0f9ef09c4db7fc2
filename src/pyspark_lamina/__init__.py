"""lamina's Spark data source, found by Spark's lookup of Python data sources (a
top-level module named ``pyspark_*`` holding a ``DefaultSource``): installing lamina
makes ``format("lamina")`` work in every Spark session of the environment."""

from lamina.datasource import LaminaDataSource as DefaultSource

__all__ = ["DefaultSource"]
