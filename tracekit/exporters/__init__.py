"""Export: the analysis as files people use — parquet tables (DuckDB, pandas) and annotated Perfetto traces.

See docs/export.md for the tables, their columns and the extra tracks of the annotated trace.
"""

from .parquet import TABLE_COLUMNS, ExportTables, collect, export_parquet, write_parquet
from .perfetto import annotate_trace, track_events, write_annotated_trace

__all__ = [
    "TABLE_COLUMNS",
    "ExportTables",
    "annotate_trace",
    "collect",
    "export_parquet",
    "track_events",
    "write_annotated_trace",
    "write_parquet",
]
