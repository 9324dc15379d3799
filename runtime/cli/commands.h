// The gpunvme command-line tool: one function per subcommand, registered in main.cpp.
#pragma once

namespace gpunvme::cli {

int cmd_identify(int argc, char** argv);
int cmd_demo(int argc, char** argv);
int cmd_deploy(int argc, char** argv);
int cmd_verify(int argc, char** argv);
int cmd_ls(int argc, char** argv);
int cmd_doctor(int argc, char** argv);
int cmd_read(int argc, char** argv);

}  // namespace gpunvme::cli
