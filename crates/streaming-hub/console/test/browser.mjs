// Headless Chromium for the console's browser tests: Debian's, driven through playwright-core
// (the module at PLAYWRIGHT, installed by `scripts/services console`).
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

/** Starts the browser. */
export function launch() {
  const { chromium } = require(process.env.PLAYWRIGHT);
  return chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  });
}
