"""Memory monitor: measurement, pure kill policy, who-is-who, retry budgets, the monitor loop.

Entry points for the rest of raydbg (none imports Ray at module load):
  raydbg.memory.service.spawn(gcs_address, node_id)   the agent starts the monitor process
  raydbg.memory.gate.worker_setup()                   the worker setup hook (budgets + start gate)
  raydbg.memory.gate.driver_setup()                   the driver (budgets of submitted tasks)
"""
