"""Steps: which markers delimit a step, its phase, batch size and GPU window (A1), found once per trace.

Modules: finder, model, resolve."""
