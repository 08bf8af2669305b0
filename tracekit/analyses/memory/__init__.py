"""Memory from launch logs: records, the ledger (A11), KV capacity (A12) and what-ifs.

Modules: capacity, launch_log, ledger_engine, ledger_rows, whatif."""
