// The chat page at / in headless Debian Chromium (playwright-core, never a downloaded browser):
// type a message, see streamed text arrive in the assistant bubble, no request leaves the
// server, screenshot saved. Usage: node chat_page_test.cjs NPM_DIR BASE_URL API_KEY SHOT.png
"use strict";
const { createRequire } = require("node:module");
const assert = require("node:assert/strict");
const [npmDir, baseURL, apiKey, shot] = process.argv.slice(2);
const { chromium } = createRequire(npmDir + "/package.json")("playwright-core");

async function main() {
  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
    timeout: 60000,
  });
  try {
    const page = await browser.newPage();
    const foreign = [];
    page.on("request", (r) => { if (!r.url().startsWith(baseURL)) foreign.push(r.url()); });
    let chunks = 0;
    page.on("response", (r) => { if (r.url().endsWith("/v1/chat/completions")) chunks++; });
    await page.goto(baseURL + "/", { timeout: 30000 });
    assert.equal(await page.title(), "kvcache chat");
    await page.fill("#key", apiKey);
    await page.fill("#max", "24");
    await page.fill("#input", "Hello, who are you?");
    await page.press("#input", "Enter");
    await page.waitForSelector(".msg.assistant[data-done='1']", { timeout: 30000 });
    const user = await page.textContent(".msg.user");
    const answer = await page.textContent(".msg.assistant");
    assert.equal(user, "Hello, who are you?");
    assert.ok(answer.length > 0, "no streamed text");
    assert.equal(await page.$(".msg.error"), null);
    assert.equal(chunks, 1);
    assert.deepEqual(foreign, []);
    await page.screenshot({ path: shot, fullPage: true });
    console.log("chat page: PASS (" + JSON.stringify(answer) + "), screenshot " + shot);
  } finally {
    await browser.close();
  }
}

main().catch((e) => { console.error("FAIL:", e); process.exit(1); });
