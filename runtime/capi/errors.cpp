// Errors: the per-thread message, exception -> code, the handle checks every entry point runs.
#include <new>
#include <string>

#include "runtime/capi/capi_internal.h"
#include "runtime/gguf/gguf_error.h"
#include "runtime/model/model_error.h"

namespace gpunvme::capi {
namespace {

thread_local std::string t_message;
thread_local const char* t_call = "gpunvme";

gpunvme_err_t from_kind(ErrorKind k) {
  switch (k) {
    case ErrorKind::kInvalidArgument: return GPUNVME_ERR_INVALID_ARGUMENT;
    case ErrorKind::kNotFound: return GPUNVME_ERR_NOT_FOUND;
    case ErrorKind::kPermission: return GPUNVME_ERR_PERMISSION;
    case ErrorKind::kResource: return GPUNVME_ERR_RESOURCE;
    case ErrorKind::kTimeout: return GPUNVME_ERR_TIMEOUT;
    case ErrorKind::kControllerFatal: return GPUNVME_ERR_CONTROLLER_FATAL;
    case ErrorKind::kCommandFailed: return GPUNVME_ERR_COMMAND_FAILED;
    case ErrorKind::kProtocol: return GPUNVME_ERR_PROTOCOL;
    case ErrorKind::kUnsupported: return GPUNVME_ERR_UNSUPPORTED;
    case ErrorKind::kIo: return GPUNVME_ERR_IO;
  }
  return GPUNVME_ERR_INTERNAL;
}

}  // namespace

const char* last_message() { return t_message.c_str(); }
const char* current_call() { return t_call; }

CallScope::CallScope(const char* fn) : outer_(t_call) {
  t_call = fn;
  t_message.clear();
}
CallScope::~CallScope() { t_call = outer_; }

gpunvme_err_t fail(gpunvme_err_t e, const std::string& msg) {
  t_message = msg;
  return e;
}

void refuse(const std::string& msg) { throw Error(ErrorKind::kInvalidArgument, std::string(t_call) + ": " + msg); }

gpunvme_err_t from_current_exception() noexcept {
  try {
    try {
      throw;
    } catch (const Error& e) {
      return fail(from_kind(e.kind()), e.what());
    } catch (const model::ModelError& e) {
      return fail(GPUNVME_ERR_MODEL, e.what());
    } catch (const gguf::GgufError& e) {
      return fail(GPUNVME_ERR_MODEL, e.what());
    } catch (const std::bad_alloc&) {
      return fail(GPUNVME_ERR_RESOURCE, std::string(t_call) + ": out of host memory");
    } catch (const std::exception& e) {
      return fail(GPUNVME_ERR_INTERNAL, e.what());
    } catch (...) {
      return fail(GPUNVME_ERR_INTERNAL, std::string(t_call) + ": unknown exception");
    }
  } catch (...) {  // building the message itself failed (no memory)
    return GPUNVME_ERR_RESOURCE;
  }
}

void check_live(const Handle* h, uint32_t tag, const char* arg, const char* type) {
  if (!h) refuse(std::string("argument '") + arg + "' is NULL");
  if (h->magic != tag)
    refuse(std::string("argument '") + arg + "' is not a live " + type +
           " (already destroyed, or not made by the gpunvme call that makes one)");
}

std::unique_lock<std::mutex> claim_handle(Handle* h, uint32_t tag, const char* arg, const char* type) {
  check_live(h, tag, arg, type);
  std::unique_lock<std::mutex> held(h->in_use, std::try_to_lock);
  if (!held)
    refuse(std::string("another thread is inside a gpunvme call on this ") + type + " ('" + arg +
           "'); a handle is used by one thread at a time: give each thread its own, or lock around the calls");
  return held;
}

}  // namespace gpunvme::capi

using namespace gpunvme::capi;

extern "C" {

const char* gpunvme_strerror(gpunvme_err_t err) {
  switch (err) {
    case GPUNVME_OK: return "success";
    case GPUNVME_ERR_INVALID_ARGUMENT: return "invalid argument";
    case GPUNVME_ERR_NOT_FOUND: return "not found";
    case GPUNVME_ERR_PERMISSION: return "permission denied";
    case GPUNVME_ERR_RESOURCE: return "out of resources";
    case GPUNVME_ERR_TIMEOUT: return "timed out";
    case GPUNVME_ERR_CONTROLLER_FATAL: return "controller fatal status";
    case GPUNVME_ERR_COMMAND_FAILED: return "command failed";
    case GPUNVME_ERR_PROTOCOL: return "controller protocol violation";
    case GPUNVME_ERR_UNSUPPORTED: return "unsupported";
    case GPUNVME_ERR_IO: return "host I/O error";
    case GPUNVME_ERR_MODEL: return "model error";
    case GPUNVME_ERR_INTERNAL: return "internal error";
  }
  return "unknown error code";
}

const char* gpunvme_last_error_message(void) { return last_message(); }

}  // extern "C"
