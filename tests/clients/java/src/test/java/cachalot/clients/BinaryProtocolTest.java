// spymemcached round trips over the binary protocol; the tests themselves are
// in SpyMemcachedRoundTrip.

package cachalot.clients;

import net.spy.memcached.ConnectionFactoryBuilder.Protocol;

class BinaryProtocolTest extends SpyMemcachedRoundTrip {
  @Override
  Protocol protocol() {
    return Protocol.BINARY;
  }
}
