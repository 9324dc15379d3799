// gpunvme._engine: the engine bound for Python with nanobind, kept thin. A model opened as the llm tool
// opens it (engine/loaded_model.h), its tokenizer, and the generation loop (engine/generate.h) run with
// the GIL released, calling back per token. The API people use, its checks and docstrings, is
// gpunvme/model.py; C++ errors reach it as ValueError (bad arguments) or RuntimeError (the rest).
#include <nanobind/nanobind.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/set.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "examples/example_model.h"
#include "examples/llm/engine/generate.h"
#include "examples/llm/engine/loaded_model.h"
#include "examples/llm/engine/scheduler.h"
#include "host/error.h"
#include "host/text/numbers.h"
#include "runtime/cli/args.h"

namespace nb = nanobind;
using namespace gpunvme;

namespace {

// The on_token callback asked to stop (a stop string, or the consumer went away).
struct Stopped {};

class Engine {
 public:
  // n_ctx 0: min(4096, the model's context length).
  Engine(const std::vector<std::string>& devices, const std::string& executor, uint32_t n_ctx, uint32_t max_seqs,
         bool verify, std::optional<uint64_t> vram_budget, uint64_t ram_budget, bool kv_host)
      : lm_(devices) {
    const uint32_t train = lm_.model.config.n_ctx_train;
    if (n_ctx > train)
      throw std::invalid_argument("ctx " + std::to_string(n_ctx) + " is more than the model's context length (" +
                                  std::to_string(train) + ")");
    n_ctx_ = n_ctx ? n_ctx : std::min<uint32_t>(4096, train);
    llm::GpuExecOptions o;
    o.max_seqs = max_seqs;
    o.verify = verify;
    o.vram_budget = vram_budget;
    o.ram_budget = ram_budget;
    o.kv_in_host = kv_host;
    o.max_batch = 512;  // the llm tool's default --batch: a prompt chunk per pass
    gpu_ = example::use_gpu_path(executor);
    if (max_seqs == 0 && !gpu_)
      throw std::invalid_argument("max_seqs 'auto' sizes the GPU executor's KV cache from its VRAM budget: the CPU executor "
                                  "needs a count");
    ex_ = lm_.executor(gpu_, n_ctx_, o);
  }

  std::vector<uint32_t> tokenize(const std::string& text, bool add_special, bool parse_special) const {
    return lm_.tokenizer().encode(text, add_special, parse_special);
  }
  nb::bytes piece(uint32_t id) const {
    check_id(id);
    const std::string s = lm_.tokenizer().piece(id);
    return nb::bytes(s.data(), s.size());
  }

  // Greedy (temperature 0) or sampled (top-k, then top-p); stops after max_tokens, at an end-of-generation token (unless
  // ignore_eos) or at one of stop_ids, or when on_token returns true. Returns the tokens generated.
  std::vector<uint32_t> generate(const std::vector<uint32_t>& prompt, uint32_t max_tokens, float temperature,
                                 uint32_t top_k, uint64_t seed, const std::vector<uint32_t>& stop_ids, bool ignore_eos,
                                 const std::function<bool(uint32_t)>& on_token, float top_p) {
    for (uint32_t id : prompt) check_id(id);
    std::set<uint32_t> eog(stop_ids.begin(), stop_ids.end());
    if (!ignore_eos) eog.insert(lm_.model.vocab.eog.begin(), lm_.model.vocab.eog.end());
    llm::Sampler sampler(llm::SamplerOptions{.temperature = temperature, .top_k = top_k, .top_p = top_p, .seed = seed});
    std::vector<uint32_t> out;
    nb::gil_scoped_release unlocked;
    try {
      llm::generate(*ex_, prompt, max_tokens, sampler, eog, llm::GenerateOptions{}, [&](uint32_t id, std::span<const float>) {
        out.push_back(id);
        nb::gil_scoped_acquire locked;
        if (on_token(id)) throw Stopped{};
      });
    } catch (const Stopped&) {
    }
    return out;
  }

  const llm::ModelOnDevice& model() const { return lm_.model; }
  llm::Executor& executor_ref() { return *ex_; }
  uint32_t n_ctx() const { return n_ctx_; }
  std::string executor() const { return ex_->describe(); }
  uint32_t max_seqs() const { return ex_->max_seqs(); }  // max_seqs 0 (auto): what the GPU executor's budget gave
  bool has_tokenizer() const { return lm_.has_tokenizer(); }
  std::optional<std::string> chat_template() const {
    const gguf::Value* v = lm_.model.file->metadata().find("tokenizer.chat_template");
    if (!v || v->type() != gguf::ValueType::STRING) return std::nullopt;
    return v->as_string();
  }
  std::optional<std::string> token_text(int64_t id) const {
    if (id < 0 || uint64_t(id) >= lm_.model.vocab.size()) return std::nullopt;
    return lm_.model.vocab.text[size_t(id)];
  }

 private:
  void check_id(uint32_t id) const {
    if (id >= lm_.model.config.n_vocab)
      throw std::invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary (" +
                                  std::to_string(lm_.model.config.n_vocab) + " tokens)");
  }

  llm::LoadedModel lm_;
  uint32_t n_ctx_ = 0;
  bool gpu_ = false;
  std::unique_ptr<llm::Executor> ex_;
};

// The engine's continuous batching over an Engine's executor (engine/scheduler.h); step() runs its pass
// with the GIL released. One thread at a time: gpunvme.Scheduler (model.py) serializes the calls.
// draft_k > 0: each decoding sequence drafts up to that many tokens by prompt lookup per pass.
class Batch {
 public:
  Batch(Engine& e, uint32_t max_queued, uint32_t draft_k)
      : ex_(e.executor_ref()), s_(ex_, e.n_ctx(), options(max_queued, draft_k)) {}
  uint64_t submit(std::vector<uint32_t> prompt, uint32_t max_tokens, float temperature, uint32_t top_k, float top_p,
                  uint64_t seed, std::set<uint32_t> stop_tokens) {
    return s_.submit(llm::SeqRequest{std::move(prompt), max_tokens,
                                     {.temperature = temperature, .top_k = top_k, .top_p = top_p, .seed = seed},
                                     std::move(stop_tokens)});
  }
  bool cancel(uint64_t id) { return s_.cancel(id); }
  std::vector<llm::SeqEvent> step() {
    nb::gil_scoped_release unlocked;
    return s_.step();
  }
  const llm::Scheduler& get() const { return s_; }
  // What the executor counted since start (ExecStats), between passes (step() is the only other caller):
  // bytes the passes read from the device (streamed layers, fetched experts; the CPU executor reads its
  // model once at start, so 0), the time compute waited for those reads, and the expert cache's hits
  // (None where no experts are fetched).
  nb::dict io_counters() const {
    const llm::ExecStats st = ex_.stats();
    double expert_stall = 0;
    for (double v : st.prefetch.stall_seconds) expert_stall += v;
    nb::dict d;
    d["bytes_read"] = st.streamed_bytes + st.experts.bytes_read;
    d["layer_bytes_per_pass"] = st.bytes_per_step;
    d["ram_bytes_copied"] = st.ram_copied_bytes;
    d["layer_stall_seconds"] = st.stall_seconds;
    d["expert_bytes_read"] = st.has_experts ? nb::cast(st.experts.bytes_read) : nb::none();
    d["expert_hits"] = st.has_experts ? nb::cast(st.experts.hits) : nb::none();
    d["experts_routed"] = st.has_experts ? nb::cast(st.experts.requested) : nb::none();
    d["expert_stall_seconds"] = st.has_experts ? nb::cast(expert_stall) : nb::none();
    return d;
  }

 private:
  static llm::SchedulerOptions options(uint32_t max_queued, uint32_t draft_k) {
    llm::SchedulerOptions o{.max_queued = max_queued};
    if (draft_k) o.draft = llm::LookupOptions{.k = draft_k};
    return o;
  }
  llm::Executor& ex_;
  llm::Scheduler s_;
};

const char* finish_name(llm::Finish f) {
  return f == llm::Finish::stop ? "stop" : f == llm::Finish::length ? "length" : nullptr;
}

std::optional<int64_t> id_or_none(int64_t id) { return id < 0 ? std::nullopt : std::optional<int64_t>(id); }

}  // namespace

NB_MODULE(_engine, m) {
  m.doc() = "gpunvme's engine (C++), bound with nanobind; use gpunvme.Model";
  // The engine's usage and parse errors, and a bad device string, are the caller's bad arguments; a
  // missing device, a permission or a bounded wait their Python kinds; the rest RuntimeError.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      const ErrorKind k = e.kind();
      PyErr_SetString(k == ErrorKind::kInvalidArgument ? PyExc_ValueError
                      : k == ErrorKind::kNotFound      ? PyExc_FileNotFoundError
                      : k == ErrorKind::kPermission    ? PyExc_PermissionError
                      : k == ErrorKind::kTimeout       ? PyExc_TimeoutError
                                                             : PyExc_RuntimeError,
                      e.what());
    } catch (const cli::UsageError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const text::ParseError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  nb::class_<Engine>(m, "Engine")
      .def(nb::init<const std::vector<std::string>&, const std::string&, uint32_t, uint32_t, bool, std::optional<uint64_t>,
                    uint64_t, bool>(),
           nb::arg("devices"), nb::arg("executor"), nb::arg("n_ctx"), nb::arg("max_seqs"), nb::arg("verify"),
           nb::arg("vram_budget").none(), nb::arg("ram_budget"), nb::arg("kv_host") = false)
      .def("tokenize", &Engine::tokenize, nb::arg("text"), nb::arg("add_special"), nb::arg("parse_special"))
      .def("piece", &Engine::piece, nb::arg("id"))
      .def("generate", &Engine::generate, nb::arg("prompt"), nb::arg("max_tokens"), nb::arg("temperature"),
           nb::arg("top_k"), nb::arg("seed"), nb::arg("stop_ids"), nb::arg("ignore_eos"), nb::arg("on_token"),
           nb::arg("top_p") = 1.0f)
      .def_prop_ro("n_ctx", &Engine::n_ctx)
      .def_prop_ro("executor", &Engine::executor)
      .def_prop_ro("max_seqs", &Engine::max_seqs)
      .def_prop_ro("has_tokenizer", &Engine::has_tokenizer)
      .def_prop_ro("chat_template", &Engine::chat_template)
      .def_prop_ro("architecture", [](const Engine& e) { return e.model().config.arch_name; })
      .def_prop_ro("name", [](const Engine& e) { return e.model().file->model_name(); })
      .def_prop_ro("size", [](const Engine& e) { return e.model().file->data_end(); })
      .def_prop_ro("n_ctx_train", [](const Engine& e) { return e.model().config.n_ctx_train; })
      .def_prop_ro("n_vocab", [](const Engine& e) { return e.model().config.n_vocab; })
      .def_prop_ro("n_layer", [](const Engine& e) { return e.model().config.n_layer; })
      .def_prop_ro("bos_id", [](const Engine& e) { return id_or_none(e.model().vocab.bos); })
      .def_prop_ro("eos_id", [](const Engine& e) { return id_or_none(e.model().vocab.eos); })
      .def_prop_ro("eog_ids", [](const Engine& e) {
        return std::vector<uint32_t>(e.model().vocab.eog.begin(), e.model().vocab.eog.end());
      })
      .def("token_text", &Engine::token_text, nb::arg("id"))
      .def_prop_ro("device", [](const Engine& e) { return e.model().device_args; });
  nb::exception<llm::QueueFull>(m, "QueueFull", PyExc_RuntimeError);
  nb::class_<llm::SeqEvent>(m, "SeqEvent")
      .def_ro("id", &llm::SeqEvent::id)
      .def_ro("token", &llm::SeqEvent::token)
      .def_prop_ro("finish", [](const llm::SeqEvent& e) { return finish_name(e.finish); })
      .def_ro("prompt_tokens", &llm::SeqEvent::prompt_tokens)
      .def_ro("generated", &llm::SeqEvent::generated)
      .def("__repr__", [](const llm::SeqEvent& e) {
        const char* f = finish_name(e.finish);
        return "SeqEvent(id=" + std::to_string(e.id) + ", token=" + std::to_string(e.token) + ", finish=" +
               (f ? "'" + std::string(f) + "'" : std::string("None")) + ", generated=" + std::to_string(e.generated) + ")";
      });
  nb::class_<Batch>(m, "Batch")
      .def(nb::init<Engine&, uint32_t, uint32_t>(), nb::arg("engine"), nb::arg("max_queued"), nb::arg("draft_k") = 0,
           nb::keep_alive<1, 2>())
      .def("submit", &Batch::submit, nb::arg("prompt"), nb::arg("max_tokens"), nb::arg("temperature"), nb::arg("top_k"),
           nb::arg("top_p"), nb::arg("seed"), nb::arg("stop_tokens"))
      .def("cancel", &Batch::cancel, nb::arg("id"))
      .def("step", &Batch::step)
      .def("io_counters", &Batch::io_counters)
      .def("active", [](const Batch& b) { return b.get().active(); })
      .def("queued", [](const Batch& b) { return b.get().queued(); })
      .def("counters", [](const Batch& b) {
        const llm::SchedulerCounters& c = b.get().counters();
        nb::dict d;
        d["passes"] = c.passes;
        d["pass_tokens"] = c.pass_tokens;
        d["prompt_tokens"] = c.prompt_tokens;
        d["generated_tokens"] = c.generated_tokens;
        d["finished"] = c.finished;
        d["cancelled"] = c.cancelled;
        d["drafted_tokens"] = c.drafted_tokens;
        d["accepted_tokens"] = c.accepted_tokens;
        return d;
      });
}
