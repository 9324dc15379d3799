// Shell quoting for the commands gpunvme prints to be pasted into a shell (deploy --print-dd).
#pragma once
#include <string>
#include <string_view>

namespace gpunvme::deploy {

// One shell word that bash reads back as exactly `s`: unchanged when it holds only characters no
// shell treats specially ([A-Za-z0-9_./,:=+@%-]); else in single quotes ('\'' for a quote); when it
// holds control characters (a newline would end a comment line or a command), in bash's $'...'
// with \xHH escapes, so the printed line stays one line.
std::string shell_quote(std::string_view s);

}  // namespace gpunvme::deploy
