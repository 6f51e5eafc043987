// nicmalloc-settings: the settings table (settings_table.h) as the README shows it.
//   nicmalloc-settings --markdown   the README's settings table, in Markdown
// tests/settings_readme.sh compares it with README.md, and writes it there with --write.
#include <cstdio>
#include <cstring>
#include <string>

extern "C" {
#include "settings.h"
}

namespace {

// A pipe would end the Markdown cell.
std::string Cell(const char *text) {
  std::string out;
  for (const char *c = text; *c; c++)
    out += *c == '|' ? std::string("\\|") : std::string(1, *c);
  return out;
}

void Markdown() {
  std::printf("| variable | default | takes | meaning |\n|---|---|---|---|\n");
  for (int i = 0; i < NIC_S_COUNT; i++) {
    const struct nic_setting_info *s = nic_setting_row(static_cast<nic_setting>(i));
    char takes[256];
    nic_setting_describe(static_cast<nic_setting>(i), takes, sizeof takes);
    std::string def = *s->def ? "`" + std::string(s->def) + "`" : "unset";
    std::printf("| `%s` | %s | %s | %s |\n", s->name, def.c_str(), Cell(takes).c_str(),
                Cell(s->help).c_str());
  }
}

} // namespace

int main(int argc, char **argv) {
  if (argc == 2 && !std::strcmp(argv[1], "--markdown")) {
    Markdown();
    return 0;
  }
  std::fprintf(stderr, "usage: %s --markdown\n", argv[0]);
  return 2;
}
