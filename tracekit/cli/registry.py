"""The CLI's view of the one list of commands, which lives in ``tracekit/registry.py`` (plain data, so that the
package can generate its public names from it without building the CLI)."""

from ..registry import COMMANDS, api_function, public_name

__all__ = ["COMMANDS", "api_function", "public_name"]
