// Text that came from outside (GGUF names, device strings, labels) made safe to print:
// for a terminal or a log, and for JSON. Both accept any bytes.
#pragma once
#include <string>
#include <string_view>

namespace gpunvme::text {

// For text output: control characters (C0, DEL, and C1 such as CSI), and bytes that are not valid
// UTF-8, become visible escapes (\n, \t, \r, \e, \xNN, \u{NN}), so a name can neither end a line,
// move the cursor nor forge a line of its own. Valid printable UTF-8 passes through unchanged.
std::string printable(std::string_view s);

// The JSON string literal (quotes included) for any bytes: `"` and `\` escaped, control characters
// as \n, \t, \r or \u00NN, and each byte that is not part of valid UTF-8 as \udcNN: a lone low
// surrogate, as Python's surrogateescape spells byte NN, so nothing is lost:
// json.loads(out).encode("utf-8", "surrogateescape") gives the original bytes back. The result is
// plain ASCII plus valid UTF-8 and parses as JSON whatever the input.
std::string json_string(std::string_view s);

// json_string without the surrounding quotes, for printf-style builders.
std::string json_escape(std::string_view s);

}  // namespace gpunvme::text
