-- Neovim (0.7+) as planc lsp's client: open a plan, wait for the diagnostics, apply the
-- quick fix the server offers for the first diagnostic that has one, format the buffer
-- through the server, write what the editor holds to $PLANC_NVIM_OUT, quit.
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

-- The quick fix: the code actions for each diagnostic, as the editor's menu asks for them
-- (the diagnostic as the server sent it, its `data` included).
for _, d in ipairs(vim.diagnostic.get(buf)) do
  local lsp = (d.user_data and d.user_data.lsp) or {}
  local range = {
    start = { line = d.lnum, character = d.col },
    ["end"] = { line = d.end_lnum or d.lnum, character = d.end_col or d.col },
  }
  local sent = {
    range = range, message = d.message, code = lsp.code or d.code, data = lsp.data,
    severity = d.severity, source = d.source,
  }
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(buf) },
    range = range,
    context = { diagnostics = { sent } },
  }
  local replies = vim.lsp.buf_request_sync(buf, "textDocument/codeAction", params, 5000) or {}
  local applied = false
  for _, reply in pairs(replies) do
    for _, action in ipairs(reply.result or {}) do
      if not applied and action.edit then
        table.insert(lines, "quick fix: " .. action.title)
        if not pcall(vim.lsp.util.apply_workspace_edit, action.edit, "utf-16") then
          vim.lsp.util.apply_workspace_edit(action.edit)
        end
        applied = true
      end
    end
  end
  if applied then break end
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
