-- Neovim (0.7+) as planc lsp's client: open a plan, wait for the diagnostics, format the
-- buffer through the server, write what the editor holds to $PLANC_NVIM_OUT, quit.
-- Run by tests/editor.rs: nvim --headless --clean -c "luafile tests/editor/nvim-lsp.lua"
local planc = os.getenv("PLANC")
local file = os.getenv("PLANC_NVIM_FILE")
local out = os.getenv("PLANC_NVIM_OUT")
local lines = {}

vim.cmd("edit " .. vim.fn.fnameescape(file))
local buf = vim.api.nvim_get_current_buf()
local client = vim.lsp.start_client({
  name = "planc",
  cmd = { planc, "lsp" },
  root_dir = vim.fn.fnamemodify(file, ":h"),
})
vim.lsp.buf_attach_client(buf, client)

local got = vim.wait(10000, function() return #vim.diagnostic.get(buf) > 0 end, 20)
table.insert(lines, "diagnostics received: " .. tostring(got))
for _, d in ipairs(vim.diagnostic.get(buf)) do
  local code = d.code or (d.user_data and d.user_data.lsp and d.user_data.lsp.code) or "?"
  local first = vim.split(d.message, "\n")[1]
  table.insert(lines, string.format("diagnostic %d:%d %s %s", d.lnum + 1, d.col + 1, code, first))
end

if vim.lsp.buf.format then
  vim.lsp.buf.format({ timeout_ms = 5000 })
else
  vim.lsp.buf.formatting_sync(nil, 5000)
end
for _, l in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
  table.insert(lines, "buffer " .. l)
end

vim.fn.writefile(lines, out)
vim.lsp.stop_client(client)
vim.cmd("qa!")
