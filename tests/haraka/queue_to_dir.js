// Haraka queue plugin for tests/integrations.rs: writes each queued message to $HARAKA_MAIL_DIR/<uuid>.eml and accepts it.
const fs = require('fs')
const path = require('path')
exports.hook_queue = function (next, connection) {
  const txn = connection.transaction
  const file = path.join(process.env.HARAKA_MAIL_DIR, `${txn.uuid}.eml`)
  const out = fs.createWriteStream(file)
  out.on('finish', () => next(OK, 'queued by to_dir'))
  out.on('error', (err) => next(DENYSOFT, `to_dir: ${err}`))
  txn.message_stream.pipe(out)
}
