// Faults from text: the `fault=` option of an emu: device string, so tools, benchmarks and users
// can inject controller misbehaviour without code. One grammar, documented here and in --help:
//
//   fault=KIND[:KEY=VALUE]...            (repeat fault= to arm several)
//   KIND   error      the command is not executed; it completes with sct/sc/dnr
//          drop       the command executes; its completion is held until an Abort or a reset
//          delay      the command executes; its completion comes `by` later
//          wrong-cid  the command executes; its completion carries a wrong command id
//          cfs        CSTS.CFS is set; nothing is processed until a controller reset
//          removal    surprise removal: BAR0 reads all ones from then on; nothing is processed
//          fatal-at-enable | slow-ready | never-ready
//                     at a CC.EN 0 -> 1 (nth counts enables: nth=2 is the first reset's)
//   KEY    q=N|admin|io|any   SQ id (command faults; default io = every I/O queue)
//          op=read|write|flush|CODE   opcode (command faults; default any)
//          nth=N      first firing on the Nth match (default 1, or `every` when every= is given)
//          every=N    then on every Nth match after that (periodic)
//          times=N    fire at most N times; 0 = no limit (default 1; 0 when every= is given)
//          at=DUR     count matches only from DUR after the device is opened (e.g. at=2s)
//          sct=CODE sc=CODE dnr=0|1   error status (default sct=0 sc=0x06 Internal Error, dnr=0)
//          by=DUR     delay and slow-ready: how long (required there)
//          xor=CODE   wrong-cid: the id is XORed with this (default 0x8000)
//   N is a number, CODE a number or 0x-hex, DUR a number with ns|us|ms|s (host/text/numbers.h).
#pragma once
#include <string>
#include <string_view>

#include "host/emulator/faults.h"

namespace gpunvme::emu {

// Parses one fault= value. Throws gpunvme::Error(kInvalidArgument) naming the bad part and the form.
Fault parse_fault_spec(std::string_view text);

// Refuses a fault that can never fire on a controller granting `max_io_queues` I/O queues (a q= past
// them), naming it: an armed fault that never fires would pass a test that proves nothing.
void check_fault_can_fire(std::string_view text, const Fault& f, uint32_t max_io_queues);

// The grammar above in a few lines, for error messages and --help.
const char* fault_spec_help();

}  // namespace gpunvme::emu
