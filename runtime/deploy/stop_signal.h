// SIGINT/SIGTERM during a deploy (`gpunvme deploy`, llm_make_model --device): one line on stderr
// saying what the device or striped set holds now, then the process ends by the signal as it would
// have (the exit status shells and supervisors expect). What the devices hold needs no handler:
// deploy writes in an order that leaves an in-progress record, or members that do not open as a set,
// wherever it stops (deploy.h), SIGKILL and power loss included. The handler only says so.
#pragma once

namespace gpunvme::deploy {

// Installs the handler for SIGINT and SIGTERM; `tool` starts the line ("gpunvme deploy"). Call it
// before the devices are opened, so that a stop at any point, opening included, gets the line.
void report_stop_signals(const char* tool);

}  // namespace gpunvme::deploy
