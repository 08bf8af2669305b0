"""Steps: which markers delimit a step, its phase, batch size and GPU window (A1), found once per trace.

Modules: model (options, dialects, Steps), activity, finder, health, resolve (find_steps, the steps command)."""
