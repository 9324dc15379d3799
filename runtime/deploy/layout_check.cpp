#include "runtime/deploy/layout_check.h"

#include <string>
#include <vector>

#include "runtime/deploy/safety.h"
#include "runtime/model/deploy_record.h"
#include "runtime/model/model_error.h"

namespace gpunvme::deploy {
namespace {

std::vector<uint8_t> first_block(const model::BlockIo& io) {
  std::vector<uint8_t> b(io.lba_size);
  io.read(0, 1, b.data());
  return b;
}

// "DEV is member 2 of striped set ...", or "" when LBA 0 holds no stripe record.
std::string stripe_member_text(const model::BlockIo& io) {
  const auto b = first_block(io);
  if (!model::has_stripe_magic(b)) return "";
  try {
    return model::describe_member(model::parse_stripe_record(b, io.name), io.name);
  } catch (const model::ModelError&) {
    return io.name + " holds a damaged stripe record";
  }
}

// "DEV holds the model 'NAME' (N bytes), deployed to it alone", or "" when LBA 0 holds no deploy record.
std::string own_model_text(const model::BlockIo& io) {
  const auto b = first_block(io);
  if (!model::has_record_magic(b)) return "";
  try {
    const model::DeployRecord r = model::parse_record(b, model::kRecordLba);
    return io.name + " holds the model '" + r.name + "' (" + std::to_string(r.model_bytes) + " bytes" +
           (r.in_progress ? ", its deploy unfinished" : "") + "), deployed to it alone";
  } catch (const model::ModelError&) {
    return io.name + " holds a damaged deploy record";
  }
}

// Why `members` are not the set they hold in this layout; "" when they are (its newest record goes to
// `same`). Members of different generations are still that set: the re-deploy is their fix.
std::string layout_difference(std::span<const model::BlockIo> members, uint32_t unit_blocks,
                              std::optional<model::StripeRecord>& same) {
  for (const model::BlockIo& m : members)
    if (stripe_member_text(m).empty()) return m.name + " is not one of its members";
  try {
    const std::vector<model::StripeRecord> recs = model::read_member_records(members);
    const model::StripeGeometry& g = recs[0].geometry;
    if (g.unit_blocks == unit_blocks) {
      same = model::StripeRecord{g, 0, model::newest_generation(recs)};
      return "";
    }
    return "its stripe unit is " + std::to_string(g.unit_bytes()) + " bytes, not " +
           std::to_string(uint64_t(unit_blocks) * g.lba_size) + "; --stripe-unit " + std::to_string(g.unit_bytes()) +
           ", or none, keeps it";
  } catch (const model::ModelError& e) {
    return e.what();
  }
}

}  // namespace

std::optional<model::StripeRecord> check_stripe_layout(std::span<const model::BlockIo> members, uint32_t unit_blocks,
                                                       bool force) {
  for (const model::BlockIo& m : members) {
    const std::string own = own_model_text(m);
    if (own.empty() || force) continue;
    throw RefusedError("refusing to make " + m.name + " a member of a striped set: " + own +
                       ", which the set would destroy. To replace that model, deploy to " + m.name +
                       " alone; to destroy it and lay the set anyway, add --force");
  }
  std::string member;
  for (const model::BlockIo& m : members)
    if (member.empty()) member = stripe_member_text(m);
  if (member.empty()) return std::nullopt;
  std::optional<model::StripeRecord> same;
  const std::string why = layout_difference(members, unit_blocks, same);
  if (same || force) return same;
  throw RefusedError("refusing to lay a new striped set over these devices: " + member + ", and the new set differs (" +
                     why + "): that set's model would be destroyed. To replace its model, deploy to the set as it is "
                     "laid; to destroy it and lay the new set anyway, add --force");
}

void check_not_stripe_member(const model::BlockIo& io, bool force) {
  const std::string member = stripe_member_text(io);
  if (member.empty() || force) return;
  throw RefusedError("refusing to write one model over a member of a striped set: " + member +
                     ", and one model written over it destroys the set's model. To replace that model, deploy to "
                     "the whole set (--device M1 --device M2 ..., in its order; `gpunvme ls --device M` names each "
                     "member's place); to destroy the set and use this device alone, add --force");
}

}  // namespace gpunvme::deploy
