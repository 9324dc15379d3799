#include "runtime/deploy/model_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "runtime/model/model_error.h"

namespace gpunvme::deploy {
namespace {

const char* file_type(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

}  // namespace

gguf::GgufFile open_model_file(const std::string& path, const std::string& role) {
  // stat, not open: opening a FIFO for reading blocks until a writer appears.
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    throw model::ModelError("cannot use " + path + " as " + role + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    throw model::ModelError(path + " is " + file_type(st.st_mode) + ", not a regular file; " + role +
                            " must be the GGUF file itself (save a download or pipe to a file first)");
  }
  return gguf::GgufFile::open(path);
}

}  // namespace gpunvme::deploy
