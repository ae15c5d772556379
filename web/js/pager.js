// @ts-check
// "Load more" under a paged list (the emails, received mail): the count line, and a button that fetches
// the page after the last nextCursor, adds its rows and goes away on the last page.
import { errorBox, h } from './dom.js'

/**
 * Keeps `count` saying how many `noun`s are shown and, while there are more, appends the button to
 * `results`. `first` is the first page (its rows already added); `load(cursor)` fetches the next one.
 */
export function morePages ({ results, count, first, noun, load, addRows }) {
  let cursor = first.nextCursor
  let shown = first.data.length
  const update = () => { count.textContent = `${shown} ${noun}${shown === 1 ? '' : 's'} shown${cursor ? ', more below' : ''}` }
  update()
  if (!cursor) return
  const more = h('button', { type: 'button', class: 'button secondary' }, 'Load more')
  const pager = h('div', { class: 'pager' }, more)
  results.append(pager)
  more.addEventListener('click', async () => {
    more.disabled = true
    more.textContent = 'Loading…'
    try {
      const page = await load(cursor)
      addRows(page.data)
      shown += page.data.length
      cursor = page.nextCursor
      update()
      if (!cursor) pager.remove()
    } catch (err) {
      pager.append(errorBox(err))
    } finally {
      more.disabled = false
      more.textContent = 'Load more'
    }
  })
}
