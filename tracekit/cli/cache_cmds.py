"""The cache of ingested traces (Arrow IPC files): what it holds, and clearing it."""

from __future__ import annotations

from .common import app
from .groups import App
from .options import OUTPUT, CacheDirOpt, Output

cache_app = App(
    help="What the cache holds, and clearing it. The cache keeps the traces already read,"
    " in $TRACEKIT_CACHE_DIR, else ~/.cache/tracekit.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(cache_app, name="cache")


@cache_app.command(name="info")
def cache_info_cmd(
    cache_dir: CacheDirOpt = None,
    output: Output = OUTPUT,
) -> None:
    """Where the cache is, what it holds and how big it is.

    Its entries (the trace each came from) and their size; the temporary files of writes and every other file in
    the folder are counted, not listed."""
    from ..cache.admin import cache_info

    output.write(cache_info(cache_dir))


@cache_app.command(name="clear")
def cache_clear_cmd(
    cache_dir: CacheDirOpt = None,
    output: Output = OUTPUT,
) -> None:
    """Remove every cache entry.

    Only tracekit's entries (recognised by their name and the key inside them) and the temporary files of writes
    killed more than 10 minutes ago; every other file in the folder is left as it is. The next load of each trace
    reads the file again."""
    from ..cache.admin import cache_clear

    output.write(cache_clear(cache_dir))
