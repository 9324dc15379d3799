// What a deploy would destroy by laying the devices out anew, checked before anything is written.
// Re-deploying onto the layout that is there (one namespace, or the same set in the same order with
// the same stripe unit) replaces a model, which is the normal use. Changing the layout does more: a
// set laid over namespaces in another order or stripe unit, or over a namespace that holds a model of
// its own, scrambles the model already there, and so does one model written over one member of a set.
// These are refused, naming what is there and the layout that keeps it, unless --force.
#pragma once
#include <cstdint>
#include <optional>
#include <span>

#include "runtime/model/block_io.h"
#include "runtime/model/stripe.h"

namespace gpunvme::deploy {

// Before a striped set with stripe unit `unit_blocks` is laid over `members` (in this order): the set
// they already form in exactly this layout, as a record with its geometry and the newest generation
// any member holds (a re-deploy keeps the set's id and writes the generation after that one), else
// nullopt. Members of different generations count as that set: re-deploying is how they are
// repaired. Throws RefusedError (safety.h), unless `force`, when a member holds a deploy record (a
// model of its own) or a stripe record of a set laid otherwise (another order, unit or membership,
// or damaged).
std::optional<model::StripeRecord> check_stripe_layout(std::span<const model::BlockIo> members, uint32_t unit_blocks,
                                                       bool force);

// Before one namespace is written alone: throws RefusedError, unless `force`, when it is a member
// of a striped set (a stripe record at LBA 0): writing it alone destroys the set's model.
void check_not_stripe_member(const model::BlockIo& io, bool force);

}  // namespace gpunvme::deploy
