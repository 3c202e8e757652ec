-- Attachment checks: files that run code when opened, and names that hide what they are.

local lower = string.lower

-- Office documents with macros, and HTML/SVG files (a common carrier of phishing forms).
local RISKY = {
  docm = true, dotm = true, xlsm = true, xltm = true, xlam = true, pptm = true, potm = true,
  ppam = true, sldm = true, htm = true, html = true, shtml = true, xhtml = true, svg = true,
}

rule {
  name = "ATTACH_CHECKS",
  scores = {
    ATTACH_EXECUTABLE = 5.0,  -- .exe, .scr, .js, .vbs, .bat, .jar, .iso, ...
    ATTACH_DOUBLE_EXT = 4.0,  -- photo.jpg.exe
    ATTACH_RISKY = 1.5,       -- macro-enabled Office documents, HTML and SVG files
  },
  description = "Executable or script attachments, double extensions, macro documents",
  group = "attachments",
  check = function(msg)
    local atts = msg:attachments()
    if #atts == 0 then return end
    local hits
    for i = 1, #atts do
      local a = atts[i]
      local name = a.name or a.ext or "?"
      if a.executable and not (hits and hits.ATTACH_EXECUTABLE) then
        hits = hits or {}
        hits.ATTACH_EXECUTABLE = { name }
      end
      if a.double_extension and not (hits and hits.ATTACH_DOUBLE_EXT) then
        hits = hits or {}
        hits.ATTACH_DOUBLE_EXT = { name }
      end
      local ext = a.ext and lower(a.ext)
      if ext and RISKY[ext] and not (hits and hits.ATTACH_RISKY) then
        hits = hits or {}
        hits.ATTACH_RISKY = { name }
      end
    end
    return hits
  end,
}
